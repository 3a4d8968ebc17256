"""Float32 products in every operand layout (gemm_layout_script.py) on libmxrt against
libmxnet.so and a float64 numpy reference, on one and two intra-op threads."""

import pytest

from conftest import assert_close, json_results, libmxrt

SCRIPT = "gemm_layout_script.py"

SETTINGS = {
    "1thread": (("OMP_NUM_THREADS", "1"),),
    "2threads": (("OMP_NUM_THREADS", "2"),),
}


def case_names():
    return sorted(json_results(SCRIPT, "mxnet"))


def test_every_case_ran():
    cases = json_results(SCRIPT, "mxnet")
    assert len(cases) == 40
    assert all("ok" in v for v in cases.values()), cases


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("case", case_names())
def test_matches_mxnet_and_numpy(case, setting):
    real = json_results(SCRIPT, "mxnet")[case]
    ours = json_results(SCRIPT, str(libmxrt()), SETTINGS[setting])[case]
    assert "ok" in ours, f"mxrt fails: {ours.get('error')}"
    real, ours = real["ok"], ours["ok"]
    assert real["shape"] == ours["shape"]
    scale = max(abs(v) for v in ours["ref"])
    # float32 sums of up to 1024 products of values in [-1, 1]
    assert_close(ours["ref"], ours["y"], 1e-4, 1e-5 * scale, f"{case}.y vs numpy")
    assert_close(real["y"], ours["y"], 1e-4, 1e-5 * scale, f"{case}.y vs libmxnet")
