"""The small tensor and contrib operators and the random densities (misc_ops_script.py) on
libmxrt against libmxnet.so: forward outputs, output dtypes and gradients case by case in float32
and float64, errors of bad parameters, and the ops that write their inputs or a given output."""

import numpy as np
import pytest

from conftest import close, json_results, libmxrt

SCRIPT = "misc_ops_script.py"


def ours():
    return json_results(SCRIPT, str(libmxrt()))


def theirs():
    return json_results(SCRIPT, "mxnet")


def case_names():
    return sorted(theirs()["cases"])


@pytest.mark.parametrize("name", case_names())
def test_forward_and_gradients_match_mxnet(name):
    real, got = theirs()["cases"][name], ours()["cases"][name]
    assert "error" not in real, f"the case fails on MXNet: {real['error']}"
    assert "error" not in got, f"mxrt fails: {got['error']}"
    assert got["dtypes"] == real["dtypes"]
    assert len(got["out"]) == len(real["out"])
    # MXNet computes float32 in float32, mxrt in float64; in float64 MXNet's digamma (gamma,
    # dirichlet and negative binomial gradients) takes a float32 logarithm
    rtol, atol = (2e-4, 1e-5) if name.endswith("float32") else (1e-6, 2e-6)
    for i, (a, b) in enumerate(zip(got["out"], real["out"])):
        assert close(a, b, rtol, atol), f"output {i}: {a} vs MXNet's {b}"
    assert len(got["grads"]) == len(real["grads"])
    for i, (a, b) in enumerate(zip(got["grads"], real["grads"])):
        assert close(a, b, rtol, atol), f"gradient of input {i}: {a} vs MXNet's {b}"


# the op mxrt's message names and a piece of MXNet's message that it contains too (a third item:
# MXNet's own wording where mxrt's differs)
ERRORS = {
    "khatri_rao_columns": ("khatri_rao", "num_columns"),
    "khatri_rao_int": ("khatri_rao", "floating point", "Not implmented"),
    "cumsum_axis": ("cumsum", "axis"),
    "cumsum_dtype": ("cumsum", "dtype"),
    "ravel_shape_empty": ("ravel_multi_index", "Empty shape parameter for ravel operator"),
    "ravel_rows": ("ravel_multi_index", "First dimension of input of ravel operator does not match"),
    "unravel_shape_empty": ("unravel_index", "Empty shape parameter for unravel operator"),
    "scatter_nd_shape": ("scatter_nd", "Invalid data, indices"),
    "scatter_nd_index_ndim": ("scatter_nd", "scatter_nd requires index tensor to have at least 2 dimensions"),
    "scatter_nd_too_many": ("scatter_nd", "Number of indices exceeds output dimension"),
    "all_finite_int": ("all_finite", "This operation only support floating point types, not int32"),
    "amp_multicast_count": ("amp_multicast", "expects 3 inputs, but got 2"),
    "im2col_kernel_big": ("im2col", "kernel size exceed input"),
    "im2col_stride_dims": ("im2col", "Stride must have the same number of dimensions with kernel_size"),
    "col2im_size": ("col2im", "output size does not match convolution parameters"),
    "col2im_output_size_dims": ("col2im", "Output size must have the same number of dimensions with kernel_size"),
    "batchnorm_v1_3d": ("BatchNorm_v1", "", "Check failed"),
    "pdf_param_shape": ("pdf_normal", "Shape inconsistent"),
    "pdf_param_rank": ("pdf_normal", "must be at least dimension of distribution parameters"),
    "pdf_param_mismatch": ("pdf_normal", "Shape inconsistent"),
    "pdf_int": ("pdf_exponential", "This operation only support floating point types, not int32"),
}


def test_every_error_case_is_checked():
    assert sorted(ERRORS) == sorted(theirs()["errors"])


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_bad_parameters_fail_as_in_mxnet(name):
    real = theirs()["errors"][name]
    assert real is not None, "MXNet accepts it"
    msg = ours()["errors"][name]
    assert msg is not None, "mxrt accepts it"
    op, text, *theirs_text = ERRORS[name]
    assert (theirs_text[0] if theirs_text else text) in real, real
    assert op in msg and text in msg, msg


def test_reset_arrays_zeros_its_inputs_and_returns_nothing():
    real, got = theirs()["inplace"]["reset_arrays"], ours()["inplace"]["reset_arrays"]
    assert got == real
    assert got["a"] == [0.0] * 6 and got["b"] == [0.0] * 4


def test_all_finite_without_init_output_keeps_the_given_output():
    for key in ["all_finite_no_init", "multi_all_finite_no_init"]:
        assert ours()["inplace"][key] == theirs()["inplace"][key], key
    assert ours()["inplace"]["all_finite_no_init"] == [[1.0], [0.0], [0.0]]


def test_identity_attach_kl_sparse_reg_updates_moving_average_in_backward():
    real, got = theirs()["inplace"]["kl_sparse_reg"], ours()["inplace"]["kl_sparse_reg"]
    assert got["aux_names"] == real["aux_names"] and got["args"] == real["args"]
    for key in ["out", "grad1", "avg1", "grad2", "avg2"]:
        assert close(got[key], real[key], 1e-5, 1e-6), f"{key}: {got[key]} vs MXNet's {real[key]}"
    assert real["avg1"] != real["avg2"]


def test_amp_multicast_dtypes_follow_mxnet_type_inference():
    real, got = theirs()["amp_types"], ours()["amp_types"]
    assert sorted(got) == sorted(real)
    for key, want in real.items():
        have = got[key]
        assert have["inferred"] == want["inferred"], key
        # MXNet's CPU kernel refuses float16 and float64; mxrt runs them with the inferred dtypes
        assert have["run"] == want["inferred"], f"{key}: {have['run']}"
        assert close(have["values"], have["want"], 1e-3, 1e-3), key


def test_cumsum_negative_axis_is_numpys():
    got = ours()["inplace"]["cumsum_negative_axis"]
    assert "error" not in got, got
    assert close(got["got"], got["numpy"], 1e-5, 1e-6)
    assert np.allclose(np.array(got["got"]).reshape(3, 4, 5)[..., -1],
                       np.array(got["numpy"]).reshape(3, 4, 5)[..., -1])


def test_batchnorm_v1_folds_batch_statistics_into_the_moving_ones_in_backward():
    real, got = theirs()["inplace"]["batchnorm_v1"], ours()["inplace"]["batchnorm_v1"]
    assert real["moving_mean"] != [0.0, 0.0]
    assert close(got, real, 1e-4, 1e-5), f"{got} vs MXNet's {real}"
