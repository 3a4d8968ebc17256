"""The linear-algebra operators (`mx.nd.linalg.*`, la_script.py) on libmxrt against libmxnet.so:
forward outputs and gradients case by case (float32 and float64, batched, every flag), numpy
identities of the factorisations, bad invokes (failing on both, mxrt's message naming the op),
the ops through `mx.sym.linalg` and a bound executor, and the visible outputs' shapes."""

import pytest

from conftest import close, json_results, libmxrt

SCRIPT = "la_script.py"


def ours():
    return json_results(SCRIPT, str(libmxrt()))


def theirs():
    return json_results(SCRIPT, "mxnet")


def tolerances(name):
    # float32 results of factorisations differ from LAPACK's in the last bits; their gradients
    # go through solves and amplify that a little
    return (1e-7, 1e-8) if name.endswith("_f64") else (2e-3, 2e-4)


def case_names():
    return sorted(theirs()["cases"])


@pytest.mark.parametrize("name", case_names())
def test_forward_and_gradients_match_mxnet(name):
    real, got = theirs()["cases"][name], ours()["cases"][name]
    assert "error" not in real, f"the case fails on MXNet: {real['error']}"
    assert "error" not in got, f"mxrt fails: {got['error']}"
    rtol, atol = tolerances(name)
    assert len(got["out"]) == len(real["out"])
    for i, (a, b) in enumerate(zip(got["out"], real["out"])):
        assert close(a, b, rtol, atol), f"output {i}: {a} vs MXNet's {b}"
    assert len(got["grads"]) == len(real["grads"])
    for i, (a, b) in enumerate(zip(got["grads"], real["grads"])):
        assert close(a, b, rtol, atol), f"gradient of input {i}: {a} vs MXNet's {b}"


REFS = [
    "potrf_lower", "potrf_upper", "potrf_numpy", "potri", "inverse", "det", "slogdet", "syevd", "syevd_values",
    "syevd_signs", "gelqf", "gelqf_orthonormal", "gemm", "trsm", "trsm_right_t", "maketrian_inverts_extracttrian"]


def test_every_identity_is_checked():
    assert sorted(ours()["refs"]) == sorted(REFS)


@pytest.mark.parametrize("name", REFS)
def test_numpy_identities(name):
    assert theirs()["refs"][name][0], f"MXNet: {theirs()['refs'][name]}"
    ok, detail = ours()["refs"][name]
    assert ok, detail


# the op each bad invoke's message must name
ERRORS = {
    "gemm2_shapes": "linalg_gemm2",
    "gemm_c_shape": "linalg_gemm",
    "gemm2_ndim": "linalg_gemm2",
    "gemm2_axis": "linalg_gemm2",
    "potrf_not_square": "linalg_potrf",
    "potrf_not_pd": "linalg_potrf",
    "potrf_1d": "linalg_potrf",
    "trmm_shapes": "linalg_trmm",
    "trsm_not_square": "linalg_trsm",
    "syevd_not_square": "linalg_syevd",
    "gelqf_tall": "linalg_gelqf",
    "inverse_not_square": "linalg_inverse",
    "inverse_singular": "linalg_inverse",
    "det_not_square": "linalg_det",
    "extractdiag_offset": "linalg_extractdiag",
    "maketrian_length": "linalg_maketrian",
    "gemm2_int": "linalg_gemm2",
}


def test_every_bad_invoke_is_checked():
    assert sorted(theirs()["errors"]) == sorted(ERRORS)


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_bad_invokes_fail_naming_the_op(name):
    assert theirs()["errors"][name] is not None, "MXNet accepts it"
    msg = ours()["errors"][name]
    assert msg is not None, "mxrt accepts it"
    assert ERRORS[name] in msg, msg


def test_not_positive_definite_message():
    msg = ours()["errors"]["potrf_not_pd"]
    assert "positive definite" in msg, msg


@pytest.mark.parametrize("name", ["gemm2", "potrf", "trsm", "syevd", "gelqf_combined",
                                  "potri_one_hot_mask_f64", "slogdet"])
def test_symbolic_executor_matches_mxnet(name):
    real, got = theirs()["symbolic"][name], ours()["symbolic"][name]
    assert "error" not in real, real
    assert "error" not in got, got["error"]
    assert got["outputs"] == real["outputs"]
    assert got["shapes"] == real["shapes"]
    for i, (a, b) in enumerate(zip(got["out"], real["out"])):
        assert close(a, b, 2e-3, 2e-4), f"output {i}: {a} vs MXNet's {b}"
    assert sorted(got["grads"]) == sorted(real["grads"])
    for k in real["grads"]:
        assert close(got["grads"][k], real["grads"][k], 2e-3, 2e-4), f"gradient of {k}"


def test_visible_output_shapes_match_mxnet():
    assert ours()["shapes"] == theirs()["shapes"]
