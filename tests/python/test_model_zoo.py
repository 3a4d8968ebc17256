"""Gluon model-zoo networks (pretrained=False; model_zoo_script.py) exported on one library
load and run on the other with the same outputs (float32 tolerance), both ways: exported by
MXNet's libmxnet.so and run on libmxrt, exported by libmxrt and run on libmxnet.so."""
import json

import pytest

from conftest import libmxrt, run_script

NETS = ["resnet18_v1", "resnet18_v2", "mobilenet0.25", "mobilenetv2_0.25", "squeezenet1.1",
        "densenet121"]


def script(library, *args):
    proc = run_script("model_zoo_script.py", library, args=args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("direction", ["mxnet_to_mxrt", "mxrt_to_mxnet"])
def test_exported_networks_run_with_the_same_outputs(direction, tmp_path):
    mxrt = str(libmxrt())
    exporter, runner = ("mxnet", mxrt) if direction == "mxnet_to_mxrt" else (mxrt, "mxnet")
    exported = script(exporter, "export", str(tmp_path), *NETS)
    assert exported == {n: "ok" for n in NETS}, exported
    ran = script(runner, "run", str(tmp_path), *NETS)
    for name in NETS:
        r = ran[name]
        assert isinstance(r, dict), f"{name}: {r}"
        assert r["shape"] == r["want_shape"] == [1, 10], f"{name}: {r}"
        assert r["max_ref"] > 0, f"{name}: the output is all zeros"
        assert r["max_abs"] <= 1e-4 * r["max_ref"] + 1e-9, f"{name}: {r}"
