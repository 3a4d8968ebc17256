"""UpSampling, BilinearResize2D and Crop (resize_script.py) on libmxrt against libmxnet.so:
forward outputs and gradients over nearest (one or several inputs, concat or sum) and bilinear
UpSampling, every resize mode with and without align_corners, Crop by size, offset, centre and
crop_like; bad parameters' errors."""

import pytest

from conftest import close, json_results, libmxrt

SCRIPT = "resize_script.py"

# What mxrt's message must say for each error case.
ERRORS = {
    "bad_up_type": "Invalid Input: 'cubic'",
    "bad_up_not_4d": "should be 4D in (batch, channel, y, x)",
    "bad_up_sum_channels": "Number of channels must be the same when multi_input_mode==sum",
    "bad_resize_mode": "Invalid Input: 'nearest'",
    "bad_crop_offset": "offset[0] should be in [0, 2]",
    "bad_crop_too_big": "the crop height(h_w[0])",
}


@pytest.fixture(scope="module")
def both():
    return json_results(SCRIPT, "mxnet"), json_results(SCRIPT, str(libmxrt()))


def case_names():
    return sorted(json_results(SCRIPT, "mxnet"))


@pytest.mark.parametrize("case", [c for c in case_names() if c not in ERRORS])
def test_forward_and_gradients_match_mxnet(both, case):
    real, ours = both
    assert "ok" in real[case], real[case]
    assert "ok" in ours[case], f"mxrt fails: {ours[case].get('error')}"
    rtol, atol = (1e-9, 1e-10) if case.endswith("float64") else (1e-5, 1e-6)
    got, want = ours[case]["ok"], real[case]["ok"]
    if not isinstance(want, dict):
        got, want = {"value": got}, {"value": want}
    for key in want:
        assert close(got[key], want[key], rtol, atol), f"{case} {key}: {got[key]} vs MXNet's {want[key]}"


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_as_mxnet(both, case):
    real, ours = both
    assert "error" in real[case], real[case]
    assert "error" in ours[case], f"mxrt gives {ours[case]}, MXNet fails: {real[case]['error']}"
    assert ERRORS[case] in ours[case]["error"], ours[case]["error"]
