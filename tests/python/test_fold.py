"""Inference runs with BatchNorm and relu folded into the convolutions before them
(fold_script.py): resnet18_v1 and mobilenet1.0 at batch 1 and 2 through the C predict API, an
inference executor and a hybridized Gluon block give libmxnet.so's outputs within float32
rounding, also after a weight or a BatchNorm statistic is written between forwards (the
prepared weights are made again); small graphs around the folding rules (relu absorbed or not,
no bias, use_global_stats in training mode, outputs read twice, fix_gamma) match MXNet; and the
folded run matches mxrt's own unfolded run (MXRT_FOLD=0)."""
import numpy as np
import pytest

from conftest import json_results, libmxrt

NETS = ("resnet18_v1", "mobilenet1.0")


def mxnet():
    return json_results("fold_script.py", "mxnet")


def ours(fold=True):
    env = () if fold else (("MXRT_FOLD", "0"),)
    return json_results("fold_script.py", str(libmxrt()), env)


def assert_near(real, got, rtol, what):
    """Every value within rtol of the largest magnitude of `real` (outputs of deep networks:
    float32 rounding grows with the logits' scale)."""
    a, b = np.asarray(real, dtype=np.float64), np.asarray(got, dtype=np.float64)
    assert a.shape == b.shape, f"{what}: shapes {a.shape} vs {b.shape}"
    scale = max(np.abs(a).max(), 1e-3)
    err = np.abs(a - b).max() / scale
    assert err <= rtol, f"{what}: max difference {err:.2e} of the scale {scale:.3g}"


@pytest.mark.parametrize("net", NETS)
def test_networks_match_mxnet(net):
    real, got = mxnet()[net], ours()[net]
    keys = [k for k in real if k != "predict_b1_set_weight_after"]
    assert sorted(keys) == sorted(k for k in got if k != "predict_b1_set_weight_after")
    for k in keys:
        assert_near(real[k], got[k], 1e-4, f"{net} {k}")


@pytest.mark.parametrize("net", NETS)
def test_writes_between_forwards_reach_the_folded_weights(net):
    real, got = mxnet()[net], ours()[net]
    # each write changes MXNet's outputs, so a stale prepared weight would show
    for before, after in [("gluon_b2_again", "gluon_b2_new_weight"),
                          ("gluon_b2_new_weight", "gluon_b2_new_var"),
                          ("executor_b2", "executor_b2_weight_written"),
                          ("executor_b2_weight_written", "executor_b2_aux_written"),
                          ("predict_b1", "predict_b1_set_weight_first")]:
        a, b = np.asarray(real[before]), np.asarray(real[after])
        assert np.abs(a - b).max() > 1e-2 * np.abs(a).max(), (net, before, after)
    # a parameter set after forwards (libmxnet.so refuses that once MKLDNN reordered it) gives
    # what MXNet gives with it set before the first forward
    assert real["predict_b1_set_weight_after"] is None
    assert_near(real["predict_b1_set_weight_first"], got["predict_b1_set_weight_after"], 1e-4,
                f"{net} weight set after forwards")


def test_small_graphs_match_mxnet():
    real, got = mxnet()["small"], ours()["small"]
    assert sorted(real) == sorted(got)
    for k in real:
        if real[k] is None:
            assert got[k] is None, k
        elif isinstance(real[k], dict):
            for a in real[k]:
                assert_near(real[k][a], got[k][a], 1e-5, f"{k} {a}")
        else:
            assert len(real[k]) == len(got[k]), k
            for i, (a, b) in enumerate(zip(real[k], got[k])):
                assert_near(a, b, 1e-5, f"{k} output {i}")


def test_folded_matches_unfolded():
    folded, plain = ours(), ours(fold=False)
    for net in NETS:
        for k, v in plain[net].items():
            assert_near(v, folded[net][k], 1e-4, f"{net} {k}")
