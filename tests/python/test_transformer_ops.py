"""The transformer building blocks (transformer_script.py) on libmxrt against libmxnet.so: the
interleaved multi-head attention products with their gradients for several shapes and head
counts, each also equal to the reshape/transpose/batch_dot recipe it replaces; boolean_mask,
index_copy, index_array, arange_like; the errors of bad shapes and parameters."""

import pytest

from conftest import close, json_results, libmxrt

SCRIPT = "transformer_script.py"

# What mxrt's message must say for each error case (both libraries refuse them).
ERRORS = {
    "boolean_mask_axis1": "Not supported yet",
    "boolean_mask_index_length": "the index has 3 entries",
    "index_copy_bad_shape": "must be old_tensor's",
    "err_selfatt_qk_rank": "Input queries_keys_values should be 3D in seq_length-batch-proj_dim, "
                           "currently is: 2D",
    "err_selfatt_valatt_seq": "queries_keys_values.shape[0] and attention.shape[1] should be the "
                              "same, currently are 3 and 4",
    "err_selfatt_valatt_mult3": "queries_keys_values.shape[2] should be a multiple of 3, "
                                "currently is 10",
    "err_encdec_qk_width": "keys_values.shape[2] should be equal to queries.shape[2] * 2, "
                           "currently are: 6 and 4",
    "err_encdec_qk_batch": "queries.shape[1] should be equal to keys_values.shape[1], currently "
                           "are: 2 and 3",
    "err_encdec_valatt_len": "keys_values.shape[0] should be equal to attention.shape[2], "
                             "currently are 5 and 4",
    "err_encdec_valatt_heads": "attention.shape[0] should be equal to keys_values.shape[1] * heads",
    "err_selfatt_qk_float16": "Only FP32 is supported on CPU at the moment",
}


@pytest.fixture(scope="module")
def both():
    return json_results(SCRIPT, "mxnet"), json_results(SCRIPT, str(libmxrt()))


def case_names():
    return sorted(json_results(SCRIPT, "mxnet"))


@pytest.mark.parametrize("case", [c for c in case_names() if c not in ERRORS])
def test_results_match_mxnet(both, case):
    real, ours = both
    assert "ok" in real[case], real[case]
    assert "ok" in ours[case], f"mxrt fails: {ours[case].get('error')}"
    got, want = ours[case]["ok"], real[case]["ok"]
    if not isinstance(want, dict):
        got, want = {"value": got}, {"value": want}
    assert sorted(got) == sorted(want)
    for key in want:
        assert close(got[key], want[key], 1e-4, 1e-5), f"{case} {key}: {got[key]} vs MXNet's {want[key]}"


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors(both, case):
    real, ours = both
    assert "error" in real[case], f"MXNet accepts {case}: {real[case]}"
    assert "error" in ours[case], f"mxrt accepts {case}: {ours[case]}"
    assert ERRORS[case] in ours[case]["error"], ours[case]["error"]


def test_fused_products_equal_their_recipes(both):
    _, ours = both
    fused = [c for c in ours if "recipe" not in c and ("selfatt_" in c or "encdec_" in c)
             and not c.startswith("err_")]
    assert len(fused) == 14
    for case in fused:
        prefix, tag = case.rsplit("_", 1)
        recipe = ours[f"{prefix}_recipe_{tag}"]["ok"]
        for key, want in recipe.items():
            assert close(ours[case]["ok"][key], want, 1e-4, 1e-5), f"{case} {key}"


def test_boolean_mask_shapes(both):
    _, ours = both
    assert ours["boolean_mask_none"]["ok"]["shape"] == [0, 3]
    assert ours["boolean_mask_all"]["ok"]["shape"] == [5, 3]
    assert ours["boolean_mask_some"]["ok"]["shape"] == [3, 3]
    # rows the mask drops get no gradient
    d = ours["boolean_mask_some"]["ok"]["d0"]
    assert d[0:3] == [0.0, 0.0, 0.0] and d[6:9] == [0.0, 0.0, 0.0]


def test_index_array_is_int64(both):
    _, ours = both
    assert ours["index_array"]["ok"]["dtype"] == "<class 'numpy.int64'>"
